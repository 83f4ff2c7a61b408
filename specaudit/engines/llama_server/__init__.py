"""`--engines llama-server`: llama.cpp's own HTTP server, built from source and started by specaudit."""
