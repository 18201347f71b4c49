"""What refinekit knows of each model SDK: replies, errors, clients.

OpenAI (and LiteLLM, whose replies are OpenAI's shape), Anthropic and LangChain replies, told
apart by shape; no SDK is imported when these modules are.
"""
