"""Reference implementations that only the tests (and benches) use to measure or check the package:
the CPU tensor-memory meter, the value head's TD(λ) targets and unchunked cross-entropy. No part of
the package; imported as ``oracles.*``."""
