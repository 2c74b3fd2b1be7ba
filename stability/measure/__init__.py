"""Stage 4 (blocks → Measurements): what one forward and one
backward pass (or a few, or a short training run) measure."""
