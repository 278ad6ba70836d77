"""The simulated machine: memory state, engines as SimPy processes, DMA, semaphores, the runner."""
