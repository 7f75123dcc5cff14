"""One module per CLI command. Each defines ``register(app)``; none imports torch at import time."""
