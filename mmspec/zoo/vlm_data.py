"""Scenes of the zoo's VLM family: small procedurally drawn pictures (1-3 coloured shapes on a plain,
noisy or gradient background), each with a caption and questions about colour, shape, count, position
and size. Everything is a pure function of an integer seed, and the train / val / test splits are
disjoint seed ranges, so held-out scenes are never trained on.

Layout: the 60x60 picture is divided into a 3x3 grid of 20-pixel cells; each object sits entirely in its
own cell (jittered inside it), so positions have unambiguous names ("top left", "center", "bottom", ...)
and a vision tower whose patch size divides 20 sees each cell as whole patches (20 px: one patch per cell;
the full ``vlm-target`` uses 5 px: 4 x 4 patches per cell, 144 visual tokens). Within a scene
shapes are distinct and colours are distinct, so every question has exactly one answer.

Prompts (the ``<image>`` placeholder is expanded by the processor into the image tokens)::

    <image>\\nQuestion: what colour is the circle?\\nAnswer:  ->  " red"<eos>
    <image>\\nCaption:                                       ->  " a large red circle left of a small blue square"<eos>
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, ImageDraw

from .code_data import IMAGE

IMAGE_SIZE = 60  # 3x3 cells of 20 px: with patch 20 one vision patch per cell, with patch 5 sixteen
SUPERSAMPLE = 4  # shapes are drawn at 4x and box-filtered down (anti-aliased edges)
GRID = 3
CELL = IMAGE_SIZE // GRID
assert CELL * GRID == IMAGE_SIZE

SHAPES = ("circle", "square", "triangle", "star", "cross", "diamond")
COLOURS = {
    "red": (215, 35, 35),
    "green": (35, 160, 60),
    "blue": (40, 75, 225),
    "yellow": (240, 205, 20),
    "purple": (140, 50, 185),
    "orange": (250, 125, 20),
    "pink": (245, 120, 190),
}
# neutral backgrounds that contrast with every object colour
BACKGROUNDS = {
    "light grey": (228, 228, 228),
    "white": (250, 250, 250),
    "cream": (242, 236, 214),
    "pale blue": (208, 222, 236),
    "dark grey": (55, 55, 55),
    "charcoal": (28, 30, 36),
    "slate": (80, 90, 105),
}
BACKGROUND_STYLES = ("plain", "noise", "gradient")
SIZES = {"small": (0.26, 0.30), "large": (0.40, 0.44)}  # radius as a fraction of the cell size
ROWS = ("top", "middle", "bottom")
COLS = ("left", "center", "right")
NUMBERS = ("zero", "one", "two", "three")
QUESTION_TYPES = ("colour", "shape", "count", "position", "size")

# seed ranges of the splits (half-open); disjoint by construction
SPLITS = {"train": (0, 1_000_000_000), "val": (1_000_000_000, 1_000_100_000), "test": (2_000_000_000, 2_000_100_000)}

QUESTION_PROMPT = "Question: {question}\nAnswer:"
CAPTION_PROMPT = "Caption:"


def position_name(row: int, col: int) -> str:
    """3x3 cell -> "top left", "top", "top right", "left", "center", "right", "bottom left", ..."""
    r, c = ROWS[row], COLS[col]
    if r == "middle":
        return c
    if c == "center":
        return r
    return f"{r} {c}"


POSITIONS = tuple(position_name(r, c) for r in range(GRID) for c in range(GRID))


@dataclass(frozen=True)
class SceneObject:
    shape: str
    colour: str
    size: str  # "small" | "large"
    row: int
    col: int
    cx: float  # centre, in pixels of the IMAGE_SIZE picture
    cy: float
    radius: float
    angle: float  # small rotation in degrees
    rgb: tuple[int, int, int]  # the colour, slightly jittered

    @property
    def position(self) -> str:
        return position_name(self.row, self.col)

    @property
    def name(self) -> str:
        return f"{self.size} {self.colour} {self.shape}"


@dataclass(frozen=True)
class Question:
    kind: str  # one of QUESTION_TYPES, or "caption"
    question: str  # "" for captions
    answer: str

    @property
    def prompt(self) -> str:
        """The prompt body, without the image placeholder."""
        return CAPTION_PROMPT if self.kind == "caption" else QUESTION_PROMPT.format(question=self.question)


@dataclass
class Scene:
    seed: int
    objects: list[SceneObject]
    background: str
    background_rgb: tuple[int, int, int]
    style: str
    background_rgb2: tuple[int, int, int]  # second tone of a gradient
    noise: float
    gradient_dir: int  # 0 vertical, 1 horizontal, 2 diagonal
    questions: list[Question] = field(default_factory=list)

    @property
    def caption(self) -> str:
        return caption_of(self.objects)

    def image(self) -> Image.Image:
        return render(self)

    def items(self) -> list[Question]:
        """Every question of the scene plus the caption."""
        return [*self.questions, Question("caption", "", self.caption)]


def caption_of(objects: list[SceneObject]) -> str:
    """One object: "a small red circle in the top left". Several: ordered left to right (then top to
    bottom), each linked to the next by "left of" or "above": "a large red circle left of a small blue
    square above a small green star"."""
    objs = sorted(objects, key=lambda o: (o.col, o.row))
    if len(objs) == 1:
        return f"a {objs[0].name} in the {objs[0].position}"
    parts = [f"a {objs[0].name}"]
    for prev, obj in zip(objs, objs[1:]):
        parts.append("left of" if obj.col > prev.col else "above")
        parts.append(f"a {obj.name}")
    return " ".join(parts)


def questions_of(objects: list[SceneObject]) -> list[Question]:
    out = [Question("count", "how many objects are there?", NUMBERS[len(objects)])]
    for o in objects:
        out.append(Question("colour", f"what colour is the {o.shape}?", o.colour))
        out.append(Question("shape", f"what shape is the {o.colour} object?", o.shape))
        out.append(Question("position", f"where is the {o.colour} {o.shape}?", o.position))
        out.append(Question("size", f"what size is the {o.colour} {o.shape}?", o.size))
    return out


def cell_labels(scene: Scene) -> list[tuple[int, int, int]]:
    """Per grid cell, row-major: (shape index, colour index, size index), 0 meaning "no object"
    (shapes 1..len(SHAPES) in SHAPES order, colours 1..len(COLOURS) in sorted order, sizes 1 small 2 large).
    Dense targets for pretraining a vision tower."""
    out = [(0, 0, 0)] * (GRID * GRID)
    colours = sorted(COLOURS)
    for o in scene.objects:
        out[o.row * GRID + o.col] = (SHAPES.index(o.shape) + 1, colours.index(o.colour) + 1,
                                     1 if o.size == "small" else 2)
    return out


def split_seed(split: str, index: int) -> int:
    lo, hi = SPLITS[split]
    if not 0 <= index < hi - lo:
        raise IndexError(f"scene index {index} out of range for split {split!r}")
    return lo + index


def split_of_seed(seed: int) -> str:
    for name, (lo, hi) in SPLITS.items():
        if lo <= seed < hi:
            return name
    raise ValueError(f"seed {seed} belongs to no split")


def make_scene(seed: int) -> Scene:
    """The scene of ``seed`` (layout, colours, background, questions): deterministic."""
    rng = random.Random(seed)
    n = rng.choice((1, 2, 2, 3, 3))
    cells = rng.sample([(r, c) for r in range(GRID) for c in range(GRID)], n)
    shapes = rng.sample(SHAPES, n)
    colours = rng.sample(sorted(COLOURS), n)
    cell = CELL
    objects = []
    for (row, col), shape, colour in zip(cells, shapes, colours):
        size = rng.choice(("small", "large"))
        lo, hi = SIZES[size]
        radius = rng.uniform(lo, hi) * cell
        slack = max(0.0, cell / 2 - 1.07 * radius - 0.5)  # shapes reach 1.06 r: stay in the cell
        cx = (col + 0.5) * cell + rng.uniform(-slack, slack)
        cy = (row + 0.5) * cell + rng.uniform(-slack, slack)
        angle = rng.uniform(-12, 12)
        rgb = tuple(min(255, max(0, v + rng.randint(-12, 12))) for v in COLOURS[colour])
        objects.append(SceneObject(shape, colour, size, row, col, cx, cy, radius, angle, rgb))
    background = rng.choice(sorted(BACKGROUNDS))
    base = BACKGROUNDS[background]
    bg = tuple(min(255, max(0, v + rng.randint(-10, 10))) for v in base)
    style = rng.choice(BACKGROUND_STYLES)
    delta = rng.choice((-1, 1)) * rng.randint(15, 35)
    bg2 = tuple(min(255, max(0, v + delta)) for v in bg)
    noise = rng.uniform(3, 10) if style == "noise" else 0.0
    grad_dir = rng.randrange(3)
    scene = Scene(seed, objects, background, bg, style, bg2, noise, grad_dir)
    scene.questions = questions_of(objects)
    return scene


def _shape_polygon(shape: str, cx: float, cy: float, r: float, angle: float) -> list[tuple[float, float]]:
    def rot(points):
        a = math.radians(angle)
        ca, sa = math.cos(a), math.sin(a)
        return [(cx + x * ca - y * sa, cy + x * sa + y * ca) for x, y in points]

    if shape == "square":
        s = r * 0.75
        return rot([(-s, -s), (s, -s), (s, s), (-s, s)])
    if shape == "diamond":
        return rot([(0, -r), (r * 0.75, 0), (0, r), (-r * 0.75, 0)])
    if shape == "triangle":
        return rot([(0, -r), (r * 0.95, r * 0.75), (-r * 0.95, r * 0.75)])
    if shape == "star":
        pts = []
        for k in range(10):
            rad = r if k % 2 == 0 else r * 0.42
            t = -math.pi / 2 + k * math.pi / 5
            pts.append((rad * math.cos(t), rad * math.sin(t)))
        return rot(pts)
    if shape == "cross":
        w = r * 0.36
        return rot([(-w, -r), (w, -r), (w, -w), (r, -w), (r, w), (w, w), (w, r), (-w, r), (-w, w), (-r, w),
                     (-r, -w), (-w, -w)])
    raise ValueError(shape)


def _background(scene: Scene) -> np.ndarray:
    size = IMAGE_SIZE
    img = np.empty((size, size, 3), dtype=np.float64)
    img[:] = scene.background_rgb
    if scene.style == "gradient":
        t = np.linspace(0.0, 1.0, size)
        if scene.gradient_dir == 0:
            w = t[:, None]
        elif scene.gradient_dir == 1:
            w = t[None, :]
        else:
            w = (t[:, None] + t[None, :]) / 2
        w = np.broadcast_to(w, (size, size))[..., None]
        img = img * (1 - w) + np.asarray(scene.background_rgb2, dtype=np.float64) * w
    return img


def render(scene: Scene) -> Image.Image:
    """The RGB picture (IMAGE_SIZE x IMAGE_SIZE) of a scene. Each object is drawn as a coverage mask of
    its cell at SUPERSAMPLE x resolution, box-filtered down (anti-aliased) and blended onto the background."""
    cell, s = CELL, SUPERSAMPLE
    img = _background(scene)
    for o in scene.objects:
        x0, y0 = o.col * cell, o.row * cell
        mask = Image.new("L", (cell * s, cell * s), 0)
        draw = ImageDraw.Draw(mask)
        cx, cy, r = (o.cx - x0) * s, (o.cy - y0) * s, o.radius * s
        if o.shape == "circle":
            draw.ellipse((cx - r * 0.92, cy - r * 0.92, cx + r * 0.92, cy + r * 0.92), fill=255)
        else:
            draw.polygon(_shape_polygon(o.shape, cx, cy, r, o.angle), fill=255)
        a = np.asarray(mask.resize((cell, cell), Image.BOX), dtype=np.float64)[..., None] / 255.0
        region = img[y0: y0 + cell, x0: x0 + cell]
        img[y0: y0 + cell, x0: x0 + cell] = region * (1 - a) + np.asarray(o.rgb, dtype=np.float64) * a
    if scene.noise > 0:
        img = img + np.random.RandomState(scene.seed % (2**32)).normal(0.0, scene.noise, img.shape)
    return Image.fromarray(np.clip(np.rint(img), 0, 255).astype(np.uint8), "RGB")


def scenes(split: str, n: int, start: int = 0) -> list[Scene]:
    """Scenes ``start .. start + n - 1`` of a split."""
    return [make_scene(split_seed(split, i)) for i in range(start, start + n)]


def with_image(prompt: str) -> str:
    """Prompt for the VLM (image placeholder first); the text-only drafter gets ``prompt`` preceded by
    "\\n", i.e. the same text with the placeholder removed."""
    return f"{IMAGE}\n{prompt}"


def eval_questions(split: str, n_scenes: int, seed: int = 0) -> list[tuple[Scene, Question]]:
    """A fixed evaluation set: for each of ``n_scenes`` scenes, one question of every type (about a
    randomly chosen object where it matters)."""
    rng = random.Random(seed)
    out = []
    for sc in scenes(split, n_scenes):
        by_kind: dict[str, list[Question]] = {}
        for q in sc.questions:
            by_kind.setdefault(q.kind, []).append(q)
        for kind in QUESTION_TYPES:
            out.append((sc, rng.choice(by_kind[kind])))
    return out


__all__ = ["IMAGE_SIZE", "SHAPES", "COLOURS", "BACKGROUNDS", "POSITIONS", "QUESTION_TYPES", "SPLITS", "Scene",
           "SceneObject", "Question", "make_scene", "render", "scenes", "split_seed", "split_of_seed",
           "caption_of", "questions_of", "cell_labels", "GRID", "CELL", "eval_questions", "with_image", "QUESTION_PROMPT", "CAPTION_PROMPT"]
