"""hwsim advise: name a run's bottleneck and rank what to change, each with its evidence and
the gain the simulator estimates for it."""
