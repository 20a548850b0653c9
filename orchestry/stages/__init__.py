"""One module per pipeline stage (file name = stage name) and the params -> objects wiring."""
