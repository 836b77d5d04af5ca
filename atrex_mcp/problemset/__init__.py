"""The problem set: the five-file problems, their derivation and checks, W/Q/T_SOL and hardware."""
