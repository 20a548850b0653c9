"""The trained team: one frozen base model and one LoRA adapter per agent."""
