"""Analysis of what the team wrote: the cooperation-scheme classifier."""
