"""Orchestry: multi-agent GRPO for teams of LLM agents."""
