"""Programs and independent references the project makes itself for its tests, benchmarks and
bundled demos: the MAX78000 project builder (max78000_build.py) with its plain-numpy layer
reference (max78000_reference.py), and the Ethos-U85 TFLite model generator (ethosu85_models.py).
Nothing in devices/, emu/ or stub/ imports this package."""
