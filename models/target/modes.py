"""The target options' values, in a module without torch: the CLI checks them before anything
loads, and the modules that run them (choice.py) share them from here."""
COMPILE_CHOICES = ("auto", "on", "off")  # --target-compile: models/target/choice.py
QUANT_CHOICES = ("auto", "none", "int8", "int4")  # --target-quant: models/target/choice.py
