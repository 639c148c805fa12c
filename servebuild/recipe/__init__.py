"""1 recipe — what the user wrote, validated.

In: a recipe name or path (recipes/NAME.yaml and its `extends` chain) and the project root.
Out: a LoadedRecipe: the validated Recipe (schema.py), the chain of files it came from with the line of
every field, and its hash. Every file the recipe names is listed once (files.py) and checked
(hashed requirement sets: requirements.py). Errors are placed in the file of the chain that set the key.
Reads: the ground, modes/ and engines/ (a recipe's install mode and engine kind validate their fields).
"""
