import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

# tiny models: one intra-op thread is as fast and immune to oversubscription stalls
torch.set_num_threads(1)
