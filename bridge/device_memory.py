"""Simulated HBM of the ``hwsim`` device: the bytes its tensors hold, their peak, and the capacity.

A hwsim tensor's bytes are its host tensor's storage. A storage counts from the first hwsim
tensor made over it until the last of their host tensors dies (views share their base's
storage, and count once).
An allocation that would pass the capacity raises ``torch.OutOfMemoryError``, as a real device
would. The capacity is one NeuronCore's share of HBM: a stack's capacity over the cores that
share the stack (``hbm.capacity_bytes_per_stack / hbm.cores_per_stack`` of the config).
"""

from __future__ import annotations

import threading
import weakref

import torch

from hwsim.config import HardwareConfig


def core_hbm_bytes(config: HardwareConfig) -> int:
    """One NeuronCore's share of HBM, bytes."""
    return config.hbm.capacity_bytes_per_stack // config.hbm.cores_per_stack


class DeviceMemory:
    """Live and peak bytes of the device's tensors, keyed by host storage."""

    def __init__(self) -> None:
        self.capacity_bytes: int | None = None  # set by the device session (its config)
        self.capacity_source = ""
        self._live: dict[int, list[int]] = {}  # storage data_ptr -> [tensors over it, bytes]
        self._lock = threading.Lock()
        self.allocated_bytes = 0
        self.peak_bytes = 0

    def set_capacity(self, config: HardwareConfig) -> None:
        self.capacity_bytes = core_hbm_bytes(config)
        self.capacity_source = (
            f"{config.chip.name}: hbm.capacity_bytes_per_stack / hbm.cores_per_stack"
        )

    def track(self, host: torch.Tensor) -> None:
        """Count ``host``'s storage while ``host`` lives (raises past the capacity). The
        finalizer is on the host tensor: ``torch.utils.swap_tensors`` (``Module.to``) refuses
        tensors that have weak references, and only the wrapper is swapped."""
        storage = host.untyped_storage()
        nbytes = storage.nbytes()
        if nbytes == 0:
            return
        key = storage.data_ptr()
        with self._lock:
            entry = self._live.get(key)
            if entry is None:
                wanted = self.allocated_bytes + nbytes
                if self.capacity_bytes is not None and wanted > self.capacity_bytes:
                    raise torch.OutOfMemoryError(
                        f"hwsim: out of simulated HBM: allocating {nbytes} bytes with "
                        f"{self.allocated_bytes} in use would pass the device's "
                        f"{self.capacity_bytes} bytes ({self.capacity_source})"
                    )
                entry = self._live[key] = [0, nbytes]
                self.allocated_bytes = wanted
                self.peak_bytes = max(self.peak_bytes, wanted)
            entry[0] += 1
        weakref.finalize(host, self._release, key)

    def _release(self, key: int) -> None:
        with self._lock:
            entry = self._live[key]
            entry[0] -= 1
            if entry[0] == 0:
                del self._live[key]
                self.allocated_bytes -= entry[1]

    def reset_peak(self) -> None:
        with self._lock:
            self.peak_bytes = self.allocated_bytes


#: The one device's memory (the process has one hwsim device).
MEMORY = DeviceMemory()
