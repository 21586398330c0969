"""Export of everything about a person (a data subject access request): a workflow over memoryapp.

- services: filing a request, the job that writes the zip archive, its retention;
- admin: the privacy officers' pages of export requests and the archive download;
- views: the staff API (a request's state and its archive, for a signed-in staff member).
"""
