"""One-off studies: each asks one question of the GPU; experiments/README.md lists them with their answers."""
