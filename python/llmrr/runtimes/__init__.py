"""llmrr.runtimes: recorders for runtimes other than llmrr's engine, each driving the recorder
C ABI (llmrr.core.recorder). llmrr.runtimes.torch records a PyTorch / transformers model
through forward hooks; llmrr.runtimes.vllm is the vLLM general plugin (entry point group
vllm.general_plugins). Neither is imported with the package: each imports its runtime."""
