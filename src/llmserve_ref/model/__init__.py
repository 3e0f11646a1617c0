"""The model: the tiny Llama, its tokenizer and weights, and what runs one sequence."""
