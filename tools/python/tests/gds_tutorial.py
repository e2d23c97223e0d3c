# The PyTorch GDS tutorial ("Accelerating torch.save and torch.load with
# GPUDirect Storage", pytorch/tutorials unstable_source/gpu_direct_storage.py),
# its code unchanged but for two lines: `import fgds.torch as gds` where the
# tutorial uses `torch.cuda.gds` (so `torch.cuda.gds.GdsFile` is
# `gds.GdsFile`), and the device, which is FGDS_TUTORIAL_DEVICE ("cuda" in the
# tutorial, "cpu" on a host without a GPU). It runs in the current directory.
# FGDS_TUTORIAL_GDS=torch runs it on torch.cuda.gds itself (on a GPU, under
# `fgds run` that is fgds's libcufile.so.0).
import os

if os.environ.get("FGDS_TUTORIAL_GDS") == "torch":
    import torch.cuda.gds as gds
else:
    import fgds.torch as gds

DEVICE = os.environ.get("FGDS_TUTORIAL_DEVICE", "cuda")

import torch
from torch.utils.serialization import config as serialization_config

serialization_config.save.storage_alignment = 4096

import torch.nn as nn

m = nn.Linear(5, 10, device=DEVICE)
sd = m.state_dict()

with torch.serialization.skip_data():
    torch.save(sd, "checkpoint.pt")

import os
from torch._subclasses.fake_tensor import FakeTensorMode

with FakeTensorMode() as mode:
    fake_sd = torch.load("checkpoint.pt")

for k, v in fake_sd.items():
    print(f"key={k}, offset={v.untyped_storage()._checkpoint_offset}")

f = gds.GdsFile("checkpoint.pt", os.O_RDWR)

for k, v in sd.items():
    offset = fake_sd[k].untyped_storage()._checkpoint_offset
    # save_storage is a wrapper around `cuFileWrite`
    f.save_storage(v.untyped_storage(), offset)

sd_loaded = torch.load("checkpoint.pt")
for k, v in sd_loaded.items():
    assert torch.equal(v, sd[k])

with torch.serialization.skip_data():
    sd_loaded = torch.load("checkpoint.pt")

for k, v in sd_loaded.items():
    assert not torch.equal(v, sd[k])
    offset = fake_sd[k].untyped_storage()._checkpoint_offset
    # load_storage is a wrapper around `cuFileRead`
    f.load_storage(v.untyped_storage(), offset)

for k, v in sd_loaded.items():
    assert torch.equal(v, sd[k])

del f

# Not the tutorial's: every byte of the file at each storage's offset, and
# which path fgds took.
with open("checkpoint.pt", "rb") as fh:
    data = fh.read()
for k, v in sd.items():
    off = fake_sd[k].untyped_storage()._checkpoint_offset
    raw = v.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
    assert data[off : off + len(raw)] == raw, k
print("tutorial ok:", ", ".join(sorted(sd)))
