"""How DataProto's tensors travel between processes (Ray, pickle, disk).

Tensors travel as numpy arrays: pickle protocol 5 (Ray's transport) sends those as out-of-band buffers without
copying, which is several times faster than ``torch.save``-ing the TensorDict into bytes.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from verl.utils.device import is_accelerator_available

# numpy lacks some torch dtypes (bfloat16, float8): those travel as same-width integers and are viewed back.
_NUMPY_CARRIER = {
    torch.bfloat16: torch.int16,
    torch.float8_e4m3fn: torch.uint8,
    torch.float8_e5m2: torch.uint8,
}


def pack_tensordict(batch: TensorDict | None):
    if batch is None:
        return None
    arrays = {}
    for key, tensor in batch.items(include_nested=True, leaves_only=True):
        tensor = tensor.detach().cpu().contiguous()
        carrier = _NUMPY_CARRIER.get(tensor.dtype)
        arrays[key] = (str(tensor.dtype), (tensor.view(carrier) if carrier else tensor).numpy())
    device = str(batch.device) if batch.device is not None else None
    return {"format": "numpy-v1", "batch_size": tuple(batch.batch_size), "device": device, "arrays": arrays}


def unpack_tensordict(packed) -> TensorDict | None:
    if packed is None:
        return None
    if isinstance(packed, bytes):  # written by the torch.save format
        import io

        location = None if is_accelerator_available() else "cpu"
        return torch.load(io.BytesIO(packed), weights_only=False, map_location=location)
    source = {}
    for key, (dtype_name, array) in packed["arrays"].items():
        if not array.flags.writeable:  # zero-copy views of Ray's shared store are read-only; workers write in place
            array = array.copy()
        tensor = torch.from_numpy(array)
        dtype = getattr(torch, dtype_name.removeprefix("torch."))
        source[key] = tensor.view(dtype) if dtype in _NUMPY_CARRIER else tensor
    device = packed["device"]
    if device is not None and device != "cpu" and not is_accelerator_available():
        device = None  # saved on an accelerator, loaded on a CPU-only machine
    batch = TensorDict(batch_size=packed["batch_size"], device=device)
    for key, tensor in source.items():
        batch[key] = tensor
    return batch
