"""TD3 on rlsweep's public API: an algorithm plugin that lives outside the rlsweep package."""
