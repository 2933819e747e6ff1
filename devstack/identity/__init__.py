"""The verifiers of the broker's issuer in the local stack: what AWS does with a web identity token in front of moto
(``aws_front``), and an RFC 8693 token endpoint with the API its tokens open (``token_exchange``)."""
