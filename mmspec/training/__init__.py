"""Training recipes: the shared training loop, masked-diffusion objectives, DEER alignment, feature drafters
(EAGLE-style, MSD, FLASH, the image drafter) and the self-describing training outputs."""
