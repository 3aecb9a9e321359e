"""Reading what users already have: a `vllm serve` command line and Hugging Face `config.json` files
(``llmplan import vllm``)."""
