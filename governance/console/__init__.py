"""Staff pages across areas (the admin index and the platform's lists).

- overview: what each role comes to check first, on the admin index (`{% staff_overview %}`);
- activity: aggregate reads per agent per day, for the overview's charts;
- charts: inline SVG charts drawn on the server;
- review: the reads of the reviewers' queue (used by memoryapp's review and item admin);
- admin: the audit trail's and the job runs' admin (progress, retry, the schedules page).
"""
