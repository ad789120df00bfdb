"""Agent layer: environments, actors, algorithms and storages. It never imports the scheme layer."""
