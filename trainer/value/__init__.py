"""The value head: model, data, losses, training, scoring and the joint policy+value stage (seed 004)."""
