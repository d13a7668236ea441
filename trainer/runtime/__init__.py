"""Training runtime shared by every room: processes and ranks, accelerate, launch, memory, metrics files."""
