"""Erasure requests (004 "Forgetting, Redacting and Rewinding"): a workflow over memoryapp.

- services: filing a request, the job that erases the person (`memoryapp.forgetting.person`),
  the leftover scan and the signed report;
- admin: the privacy officers' pages of erasure requests.
"""
