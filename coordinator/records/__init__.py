"""The offsets log's records: their layouts, declared once, and the codecs derived from them."""
