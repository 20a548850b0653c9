"""The paper's writing task: two agents write the two parts of a TL;DR pair or an introduction."""
