"""rlhflab: a PPO-based RLHF pipeline you can see inside."""
__version__ = "0.1.0"
