"""The story task: a writer, an editor and a narrator (or any roles of roles.yaml) each write one part
of a short story on a theme at once, rewarded for quality, collaboration and efficiency."""
