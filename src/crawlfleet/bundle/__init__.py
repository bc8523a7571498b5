"""A crawlfleet node in one file: ``crawlfleet bundle`` packs this installation (and a
Scrapy project) into a zipapp that runs with a bare Python of the same version."""
