"""Training recipes: masked-diffusion objectives and DEER alignment."""
