"""hwsim mcp: the evaluation loop (run, report, advise, tune, fuzz, sweep) as Model Context
Protocol tools for an agent."""
