"""Who writes text: the generation contract (base.py), the LoRA team (lora/), the Claude agents (claude/)."""
