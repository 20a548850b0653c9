"""The paper's code task: helpers write `aux`, main writes the entry point, sandboxed tests judge."""
