"""What `refinekit.local`'s server process runs: llama-cpp-python's server, continuing replies.

`server` is the server's entry point (`python -m refinekit._local.server`); `continuation`
renders a conversation whose last message is the assistant's open, and builds the grammar
that holds a continued JSON object to its schema. Both import `llama_cpp`, so only the server
process imports them; `refinekit.local` starts it by name.
"""
