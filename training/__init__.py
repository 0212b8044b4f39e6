"""Training: task datasets, the local base builder, LoRA SFT, packaging, launch and evaluation."""
