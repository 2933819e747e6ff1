"""What every socket the broker serves shares: one accept loop with its limits as parameters (listening), HTTP/1.1
on one accepted connection via h11 (wire), and the small route table that finds a request's function (routing).
The daemon's socket, a session's ``broker.sock`` and an exec's control socket use them; so will a gateway's TCP
listener."""
