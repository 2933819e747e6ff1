"""What the broker decides with: the operator's config, the task manifest, the policy, the strict parser they share."""
