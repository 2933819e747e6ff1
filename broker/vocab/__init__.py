"""The shared vocabulary (errors, secrets, fields, durations, times, files): the standard library only.

Every other layer and every provider may import it; it imports nothing of the broker's.
"""
