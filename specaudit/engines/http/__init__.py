"""Shared by the engines that call servers: the HTTP client (`client.Endpoint`), its deadline and response models."""
