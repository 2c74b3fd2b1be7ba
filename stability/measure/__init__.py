"""Stage 3: what one forward and one backward pass (or a few) measure on the blocks."""
