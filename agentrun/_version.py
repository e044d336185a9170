"""The library's version, in a module of its own so engines never import the public face."""

VERSION = "0.1.0"
