"""Weight stream codecs."""
