"""KV transfer: accounting of bytes moved and the emulated WAN link they may cross."""
