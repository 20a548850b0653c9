"""The code-review workflow: a writer drafts the function, a reviewer comments, a refactorer returns
the final code; the code task's problems and sandbox judge the draft and the final code."""
