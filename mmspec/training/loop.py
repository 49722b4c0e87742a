"""The training loop every trainer shares (zoo builds, ``mmspec train``): AdamW with warmup and cosine decay,
early stopping on validation loss, a time budget, and checkpoints a killed run resumes from."""

from __future__ import annotations

import math
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from tqdm.auto import tqdm


@dataclass
class TrainResult:
    steps: int
    seconds: float
    best_val_loss: float
    val_history: list[tuple[int, float]]
    stopped: str  # "early-stop" | "budget" | "max-steps"
    note: str | None = None  # provenance recorded in a resumed checkpoint (e.g. a stage seeded from earlier weights)


def save_checkpoint(path: Path, state: dict) -> None:
    """Write ``state`` with ``torch.save`` atomically: a kill leaves the previous checkpoint or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict | None:
    path = Path(path)
    if not path.exists():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - a torn or foreign file must not be silently used
        raise ValueError(f"training checkpoint {path} cannot be read ({exc}); delete it to start over") from exc


def to_device(obj, device: torch.device):
    """``obj`` with every tensor in it (nested dicts, lists, tuples) moved to ``device``; other values as they are."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=True)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    return obj


def model_device(model: torch.nn.Module) -> torch.device:
    """Where a model's weights live (the device its batches must be on)."""
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def on_model(obj, model: torch.nn.Module):
    """``obj`` (made on the CPU: a tensor or nested dicts / lists / tuples of them) on ``model``'s device, where
    data meets a model outside ``train_loop`` (which moves training batches itself); a no-op on the CPU."""
    return to_device(obj, model_device(model))


def train_loop(model: torch.nn.Module, next_batch: Callable[[int], dict], val_loss: Callable[[], float],
               loss_fn: Callable[[torch.nn.Module, dict], torch.Tensor], *, max_steps: int, budget_s: float,
               lr: float = 1e-3, warmup: int = 50, eval_every: int = 100, patience: int = 3,
               weight_decay: float = 0.01, desc: str = "train", progress: bool = True,
               checkpoint: Path | None = None, checkpoint_every_s: float = 300.0,
               generators: tuple[torch.Generator | random.Random, ...] = ()) -> TrainResult:
    """AdamW + warmup/cosine; evaluates every ``eval_every`` steps, keeps the best weights and stops
    when validation has not improved ``patience`` times in a row, or the time budget runs out.

    With ``checkpoint`` the whole loop state (weights, optimiser, step, best weights, history, the
    ``generators`` that draw batches (torch or ``random.Random``), RNG states, time spent) is written there
    every ``checkpoint_every_s`` seconds and at the end, and a later call with the same path resumes from it:
    a killed multi-hour build loses at most one interval. ``budget_s`` counts the time of all runs.

    Batches are moved to the model's device, so a model built on a GPU trains there from CPU-made batches;
    checkpoints are written from and read back to whichever device the model is on."""
    device = model_device(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=weight_decay,
                            betas=(0.9, 0.95))

    def lr_at(step: int) -> float:
        if step < warmup:
            return lr * (step + 1) / warmup
        frac = min(1.0, (step - warmup) / max(1, max_steps - warmup))
        return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    best, best_state, bad, history = float("inf"), None, 0, []
    stopped, first, spent_before, done = "max-steps", 0, 0.0, False
    saved = load_checkpoint(checkpoint) if checkpoint is not None else None
    if saved is not None:
        if saved.get("max_steps") != max_steps:
            raise ValueError(f"training checkpoint {checkpoint} was written for max_steps={saved.get('max_steps')}, "
                             f"not {max_steps}; delete it to start over")
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        best, best_state, bad, history = saved["best"], saved["best_state"], saved["bad"], saved["history"]
        first, spent_before, stopped, done = saved["step"], saved["seconds"], saved["stopped"], saved["done"]
        for g, st in zip(generators, saved["generators"]):
            if isinstance(g, torch.Generator):
                g.set_state(st)
            else:
                g.setstate(st)
        torch.set_rng_state(saved["torch_rng"])
        random.setstate(saved["python_rng"])

    start = time.perf_counter()

    def spent() -> float:
        return spent_before + time.perf_counter() - start

    def write(step_done: int, finished: bool) -> None:
        if checkpoint is None:
            return
        save_checkpoint(checkpoint, {
            "model": model.state_dict(), "optimizer": opt.state_dict(), "step": step_done, "max_steps": max_steps,
            "best": best, "best_state": best_state, "bad": bad, "history": history, "seconds": spent(),
            "stopped": stopped, "done": finished,
            "generators": [g.get_state() if isinstance(g, torch.Generator) else g.getstate() for g in generators],
            "torch_rng": torch.get_rng_state(), "python_rng": random.getstate()})

    last_write = time.perf_counter()
    step = first - 1
    if not done:
        bar = tqdm(range(first, max_steps), desc=desc, disable=not progress, initial=first, total=max_steps)
        for step in bar:
            model.train()
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
            loss = loss_fn(model, to_device(next_batch(step), device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            last = step + 1 == max_steps
            out_of_time = spent() > budget_s
            if (step + 1) % eval_every == 0 or last or out_of_time:
                model.eval()
                with torch.no_grad():
                    v = float(val_loss())
                history.append((step + 1, v))
                bar.set_postfix(loss=f"{loss.item():.3f}", val=f"{v:.3f}")
                if v < best - 1e-4:
                    best, bad = v, 0
                    best_state = {k: t.detach().clone() for k, t in model.state_dict().items()}
                else:
                    bad += 1
                    if bad >= patience:
                        stopped = "early-stop"
                        break
            if out_of_time:
                stopped = "budget"
                break
            if checkpoint is not None and time.perf_counter() - last_write > checkpoint_every_s:
                write(step + 1, False)
                last_write = time.perf_counter()
        write(step + 1, True)
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return TrainResult(step + 1, spent(), best, history, stopped, (saved or {}).get("note"))


__all__ = ["TrainResult", "save_checkpoint", "load_checkpoint", "train_loop", "to_device", "model_device", "on_model"]
