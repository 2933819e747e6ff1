"""The local OAuth 2.1 stack: an authorisation server (authlib) and a resource server checking its tokens."""
