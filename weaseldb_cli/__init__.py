"""The `weaseldb` command line, the composition root above every other package."""
