"""The broker's files, byte for byte: layouts, names, encodings, read and written."""
