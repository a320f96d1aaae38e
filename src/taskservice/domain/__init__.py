"""The domain: plain data, the state machine, the checks that need nothing but a value."""
