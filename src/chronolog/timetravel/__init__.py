"""timetravel"""
