"""Local testbed: tiny models, server launching and WAN emulation for CPU clusters."""
