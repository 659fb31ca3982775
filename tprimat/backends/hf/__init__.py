"""Hugging Face Transformers backend: model from the spec (random init), trained with the Trainer."""
